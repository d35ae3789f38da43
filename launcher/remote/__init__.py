"""The SSH transport."""
