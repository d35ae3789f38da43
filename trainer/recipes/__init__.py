"""The built-in recipes, a guest written on the public API: `training` (the loop, `fit`), `components`
(dataset, model, optimizer, schedule), `step` (one step's arithmetic), `data` (the datasets), `models`, and
`cifar_files` (CIFAR-10 in torchvision's on-disk format, made locally: for the tests and benchmarks)."""
