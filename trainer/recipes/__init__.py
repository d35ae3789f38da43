"""The built-in recipes, a guest written on the public API: the loop and its data, model and step helpers."""
