"""Hypothesis strategies shared by the suite, one module per subject: pools (the
equivalence classes keys draw from), keys, wire (client messages), entries, rules."""
