"""The kernels rung's check for reprokernel: add_one on cuda:0 against torch's own x + 1.

Run as `{python} check_op.py` in the deployed workspace (bench/gpu/kernels.sh copies it
to the workspace's top level). Prints one JSON line; exits 0 only when the op ran on the
GPU and matched exactly, 1 when it computed something else, 2 when it could not run.
"""

import json
import sys

import torch


def main() -> int:
    facts = {"torch": torch.__version__, "cuda_available": torch.cuda.is_available()}
    try:
        import reprokernel
        from reprokernel import _C

        facts["extension"] = _C.__file__
        device = torch.device("cuda:0")
        facts["device"] = torch.cuda.get_device_name(device)
        facts["capability"] = ".".join(map(str, torch.cuda.get_device_capability(device)))
        x = torch.randn(1 << 20, device=device, dtype=torch.float32)
        got = reprokernel.add_one(x)
        want = x + 1
        torch.cuda.synchronize(device)
    except Exception as exc:  # the evidence is the message: "no kernel image is available"
        facts["error"] = f"{type(exc).__name__}: {exc}"
        print(json.dumps(facts))
        return 2
    facts["elements"] = x.numel()
    facts["max_abs_err"] = float((got - want).abs().max())
    facts["equal"] = bool(torch.equal(got, want))
    print(json.dumps(facts))
    return 0 if facts["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
