"""What runs on a rank: the one dispatcher, the function runner, the entrypoint loader, the script runner."""
