"""The `infercache` command line: serve, and the admin-plane clients."""
