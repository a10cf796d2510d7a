{{- /* The extender's urlPrefix, as kube-scheduler's extenders entry names it (extender-scheduler-config.yaml)
and the doctor init container checks it (daemonset.yaml, --extender): the Service's DNS name, or
extender.clusterIP where a fixed address is given (a client without the cluster's DNS). */ -}}
{{- define "gpuslice.extenderURL" -}}
{{- $host := .Values.extender.clusterIP | default (printf "%s-extender.%s.svc" .Release.Name .Release.Namespace) -}}
http://{{ $host }}:{{ .Values.extender.port }}/gpuslice
{{- end }}
