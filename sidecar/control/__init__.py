"""Control stores: shared coordination state (epochs, rules, audit, membership, holders)."""
