"""The control plane: stream and app provisioning (REST, CLI, web UI over Redis) and the
router fleet. For now it holds the `keystone` command line, whose first commands run the
embedded stack."""
