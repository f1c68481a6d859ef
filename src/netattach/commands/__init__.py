"""One CNI call's commands (ADD, DEL, CHECK, STATUS, GC) over the seams (the API, the
executor), for thin mode and the daemon alike. Imports cni/, spec/, kube/, node/."""
