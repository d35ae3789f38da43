"""The built-in recipes, a guest written on the public API: `training` (the loop, `fit`), `components`
(dataset, model, optimizer, schedule), `step` (one step's arithmetic), `data` (the datasets) and `models`."""
