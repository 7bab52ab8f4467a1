"""The side-by-side studies: bertkit beside a plain `transformers` loop on the same data and
recipe (the results study, full size and quick; the stability study over many seeds) and the
distillation table. Each is started by its script in the checkout's studies/ folder, which
names the checkout's places (`Checkout`); the records they keep are in docs/records/."""
