"""Entry script of netattach.spec's second Analysis: what thick mode's shim
(netattach_shim.main, standard library only) imports, collected and laid out as the
Python prefix dist/netattach/shim/. The installed shim is not this file but the script
`netattach install` writes (netattach.install.binary.shim_script)."""
from netattach_shim import main

if __name__ == "__main__":
    main()
