"""``locomotion-export`` from a checkout: export a checkpoint for deployment."""

from locomotion.commands.export import main

if __name__ == "__main__":
    main()
