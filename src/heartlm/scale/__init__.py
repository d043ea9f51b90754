"""The scaling study: a grid of torchrun launches, each cell timed, measured and recorded."""
