"""Cache tiers: an in-process hot tier of verified entries and a warm tier of encoded bytes."""
