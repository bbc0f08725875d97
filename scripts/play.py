"""``locomotion-play`` from a checkout: run a trained policy and print its metrics."""

from locomotion.commands.play import main

if __name__ == "__main__":
    main()
