{{- /* The extender's urlPrefix, as kube-scheduler's extenders entry names it (extender-scheduler-config.yaml),
HTTPS: the Service's DNS name, or extender.clusterIP where a fixed address is given (a client
without the cluster's DNS); the serving certificate the chart makes is valid for both. */ -}}
{{- define "gpuslice.extenderURL" -}}
{{- $host := .Values.extender.clusterIP | default (printf "%s-extender.%s.svc" .Release.Name .Release.Namespace) -}}
https://{{ $host }}:{{ .Values.extender.port }}/gpuslice
{{- end }}

{{- /* The DRA driver's name: dra.driver, or NVIDIA's gpu.nvidia.com with dra.nvidiaCompat (docs/dra.md). */ -}}
{{- define "gpuslice.draDriver" -}}
{{- if .Values.dra.nvidiaCompat }}gpu.nvidia.com{{ else }}{{ .Values.dra.driver }}{{ end -}}
{{- end }}

{{/* The extender's Secret: tls.crt, tls.key (its serving certificate), ca.crt (its client CA). */}}
{{- define "gpuslice.extenderTLSSecret" -}}
{{- .Values.extender.tls.secretName | default (printf "%s-extender-tls" .Release.Name) -}}
{{- end }}
