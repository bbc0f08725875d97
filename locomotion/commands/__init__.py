"""The user commands (console entry points ``locomotion-train``, ``-play``, ``-evaluate``,
``-export``, ``-deploy``). Importing this package loads nothing: ``deploy`` runs without
torch or the training code."""
