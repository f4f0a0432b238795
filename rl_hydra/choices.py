"""The words a config chooses among where both the schema (which refuses any other) and the code that
acts on them read them. A leaf without torch: the schema runs in a sweep's launching process too."""

TD_LOSSES = ("huber", "mse")
ACTIVATIONS = {"relu": "ReLU", "tanh": "Tanh", "elu": "ELU", "gelu": "GELU", "silu": "SiLU"}  # torch.nn's class of each
CELLS = {"lstm": "LSTM", "gru": "GRU"}  # torch.nn's class of each
