"""What runs on a node."""
