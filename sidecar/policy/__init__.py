"""Cacheability policy: the rules, the YAML policy file and its reload watcher, TTL bounds."""
