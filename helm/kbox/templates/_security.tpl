{{/*
What kbox's sandbox needs from the pod (docs/sandbox.md, "What the host must allow"). kboxd runs
as root in the container and starts every stage through kbox-sandbox, which creates new user, pid,
mount, network, ipc, uts and cgroup namespaces, maps one id (the sandbox uid, 65534) into them,
mounts a fresh read-only root, and installs kbox's own seccomp filters. Candidate code runs as that
unprivileged id with no capabilities, never as the container's root.
*/}}

{{- define "kbox.podSecurityContext" -}}
runAsUser: 0
runAsGroup: 0
runAsNonRoot: false
{{- end }}

{{- define "kbox.containerSecurityContext" -}}
{{- if .Values.sandbox.privileged -}}
# sandbox.privileged: every capability and device, a writable /sys/fs/cgroup (per-job cgroup
# limits) and an unmasked /proc.
privileged: true
allowPrivilegeEscalation: true
{{- else -}}
privileged: false
# Kubernetes rejects allowPrivilegeEscalation: false together with CAP_SYS_ADMIN; kboxd also
# exec()s kbox-sandbox as root and that child must keep the capabilities below.
allowPrivilegeEscalation: true
capabilities:
  drop: [ALL]
  add:
    # mount(2): the per-job scratch tmpfs kboxd mounts under work_dir (job_scratch_bytes), and
    # creating user namespaces where unprivileged ones are disabled by sysctl.
    - SYS_ADMIN
    # Writing the new user namespace's uid_map with an id other than the writer's own (the
    # sandbox uid), and setresuid() to it.
    - SETUID
    # The same for gid_map/setresgid(), and setgroups() to drop root's supplementary groups.
    - SETGID
    # chown() of each job's directories to the sandbox uid, so the sandboxed stage may write them.
    - CHOWN
    # kboxd (root) reading and removing what the sandbox uid wrote in 0700 job directories,
    # and opening the read-only bind sources for the sandbox's root.
    - DAC_OVERRIDE
    # chmod()/utimes() on files after they were chown()ed to the sandbox uid (build-cache
    # restores into a job's build directory).
    - FOWNER
    # Signalling processes that run as the sandbox uid: the wall-clock limit, cancellation and
    # the end of a stage kill its process group and sandbox init.
    - KILL
{{- end }}
readOnlyRootFilesystem: true
runAsUser: 0
runAsNonRoot: false
{{- with .Values.sandbox.procMount }}
procMount: {{ . }}
{{- end }}
seccompProfile:
  {{- toYaml .Values.sandbox.seccompProfile | nindent 2 }}
appArmorProfile:
  {{- toYaml .Values.sandbox.appArmorProfile | nindent 2 }}
{{- end }}
