"""Replay with real kernels: the replayed compute as torch kernels of the model's shapes and the communication
as real torch.distributed operations, timed on the machine at hand (CPU or CUDA). torch is an optional extra:
importing this package does not import it (its modules do; the CLI imports them only for --execute,
replay-comms and calibrate --device)."""
