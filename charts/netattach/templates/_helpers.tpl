{{/*
The host's CNI dirs of each preset (docs/helm.md gives each one's source): conf dir, bin dir.
*/}}
{{- define "netattach.presets" -}}
"":
  confDir: /etc/cni/net.d
  binDir: /opt/cni/bin
rke2:
  confDir: /etc/cni/net.d
  binDir: /opt/cni/bin
k3s:
  confDir: /var/lib/rancher/k3s/agent/etc/cni/net.d
  binDir: /var/lib/rancher/k3s/data/cni
microk8s:
  confDir: /var/snap/microk8s/current/args/cni-network
  binDir: /var/snap/microk8s/current/opt/cni/bin
openshift:
  confDir: /etc/kubernetes/cni/net.d
  binDir: /var/lib/cni/bin
{{- end -}}

{{/* The preset's dirs, the one asked for or a failure naming the known ones. */}}
{{- define "netattach.preset" -}}
{{- $presets := include "netattach.presets" . | fromYaml -}}
{{- $name := .Values.cni.preset | default "" -}}
{{- if not (hasKey $presets $name) -}}
{{- fail (printf "cni.preset: unknown preset %q: one of \"\" (default), rke2, k3s, microk8s, openshift" $name) -}}
{{- end -}}
{{- get $presets $name | toYaml -}}
{{- end -}}

{{/* The host's CNI conf dir. */}}
{{- define "netattach.confDir" -}}
{{- .Values.cni.confDir | default (include "netattach.preset" . | fromYaml).confDir -}}
{{- end -}}

{{/* The host's CNI bin dir. */}}
{{- define "netattach.binDir" -}}
{{- .Values.cni.binDir | default (include "netattach.preset" . | fromYaml).binDir -}}
{{- end -}}

{{/* The image reference of both containers. */}}
{{- define "netattach.image" -}}
{{- /* toString: a tag given as a number (--set image.tag=110) is its digits */ -}}
{{- printf "%s:%s" .Values.image.repository (toString .Values.image.tag | default .Chart.AppVersion) -}}
{{- end -}}

{{/*
"true" when thick mode's RBAC (templates/rbac-thick.yaml: the ServiceAccount
netattach-daemon and its bindings) is rendered: in thick mode, and in thin mode while the
live DaemonSet still runs its pods as netattach-daemon (an upgrade thick -> thin: the old
thick pods keep their account until each is replaced; deleting it and its bindings at
once would refuse their requests, 403 or 401, and each installer would read that at its
stop as an uninstall). The
next upgrade, once the thin pods run, removes it (docs/helm.md, "Thick to thin"). `lookup`
finds nothing under `helm template` and `helm lint`: they render the mode alone.
*/}}
{{- define "netattach.thickRBAC" -}}
{{- if eq .Values.mode "thick" -}}true
{{- else -}}
{{- $live := lookup "apps/v1" "DaemonSet" "kube-system" "netattach" -}}
{{- if and $live (eq (dig "spec" "template" "spec" "serviceAccountName" "" $live) "netattach-daemon") -}}true{{- end -}}
{{- end -}}
{{- end -}}

{{/* "true" when the DRA driver's RBAC is rendered (with thick mode's RBAC). */}}
{{- define "netattach.draRBAC" -}}
{{- if and (include "netattach.thickRBAC" .) (or .Values.dra.enabled .Values.dra.rbac) -}}true{{- end -}}
{{- end -}}

{{/* "true" when the metrics Service is rendered. */}}
{{- define "netattach.metricsService" -}}
{{- if or .Values.metrics.service.enabled .Values.metrics.serviceMonitor.enabled -}}true{{- end -}}
{{- end -}}

{{/*
Values that cannot work together fail the render, each naming its key. The namespace is
kube-system: the RBAC and the admission policies name netattach's ServiceAccounts there.
*/}}
{{- define "netattach.validate" -}}
{{- if ne .Release.Namespace "kube-system" -}}
{{- fail (printf "namespace %q: netattach installs into kube-system (helm install ... -n kube-system): its RBAC and admission policies name its ServiceAccounts there" .Release.Namespace) -}}
{{- end -}}
{{- if not (has .Values.mode (list "thin" "thick")) -}}
{{- fail (printf "mode: %q is not thin or thick" .Values.mode) -}}
{{- end -}}
{{- if and .Values.dra.enabled (ne .Values.mode "thick") -}}
{{- fail "dra.enabled: the DRA driver runs in the node daemon: set mode: thick" -}}
{{- end -}}
{{- if and (include "netattach.metricsService" .) (ne .Values.mode "thick") -}}
{{- fail "metrics.service.enabled, metrics.serviceMonitor.enabled: only the thick daemon serves /metrics: set mode: thick" -}}
{{- end -}}
{{- $conf := include "netattach.confDir" . -}}
{{- $bin := include "netattach.binDir" . -}}
{{- if or (not (isAbs $conf)) (not (isAbs $bin)) -}}
{{- fail (printf "cni.confDir %q, cni.binDir %q: both must be absolute paths" $conf $bin) -}}
{{- end -}}
{{- end -}}
