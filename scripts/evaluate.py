"""``locomotion-evaluate`` from a checkout: robustness sweeps of policies."""

from locomotion.commands.evaluate import main

if __name__ == "__main__":
    main()
