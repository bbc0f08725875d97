"""``locomotion-deploy`` from a checkout: run an exported policy in plain MuJoCo."""

from locomotion.commands.deploy import cli

if __name__ == "__main__":
    cli()
