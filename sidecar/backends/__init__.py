"""Adapters from the domain's storage protocols to external stores."""
