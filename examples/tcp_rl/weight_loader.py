"""The generator's vLLM worker extension: reload weights the trainers sent, from a safetensors folder.

vLLM mixes this class into its worker (``LLM(worker_extension_cls="weight_loader.WeightLoader")``); the
generator calls it with ``llm.collective_rpc("swap_in_weights", kwargs={"folder": ...})``. Tensors passed as
collective_rpc arguments arrive serialised as lists, so the weights travel as a file. ``reload_weights`` on
the model runner (not ``model.load_weights``) also refreshes the CPU kernels' packed copy.
"""

from __future__ import annotations

from pathlib import Path


class WeightLoader:
    def swap_in_weights(self, folder: str) -> int:
        """Load ``folder/model.safetensors`` into the running model; returns the number of tensors."""
        from safetensors.torch import load_file

        tensors = load_file(str(Path(folder) / "model.safetensors"))
        self.model_runner.reload_weights(weights_iterator=iter(tensors.items()))  # type: ignore[attr-defined]
        return len(tensors)

    def weights_checksum(self) -> float:
        """Sum of every parameter of the running model: the generator checks that each reload changed it."""
        import torch

        with torch.no_grad():
            return float(sum(p.double().sum() for p in self.model_runner.get_model().parameters()))  # type: ignore[attr-defined]
