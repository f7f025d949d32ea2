"""The archive tier: sealed files copied to object storage and read back from it."""
