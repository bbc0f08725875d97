"""``locomotion-train`` from a checkout: train a gait policy."""

from locomotion.commands.train import main

if __name__ == "__main__":
    main()
