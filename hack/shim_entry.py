"""PyInstaller entry script of `netattach-shim` (netattach.spec's second target): thick
mode's CNI plugin, netattach_shim.main. Standard library only."""
from netattach_shim import main

if __name__ == "__main__":
    main()
