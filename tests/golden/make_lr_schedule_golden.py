# SPDX-License-Identifier: MIT
"""Learning-rate sequences of torch 1.13's schedulers for tests/optim/test_lr_scheduler.cpp.

Run with a Python that has PyTorch (Debian's /usr/bin/python3 has torch 1.13 and NumPy):

    /usr/bin/python3 tests/golden/make_lr_schedule_golden.py

It replaces tests/golden/lr_schedule/ next to this script with one float64 .npy per case:
<case>.npy holds STEPS + 1 learning rates, get_last_lr()[0] right after construction (epoch 0)
and after each of STEPS calls of scheduler.step() (each after an optimizer.step(), as torch
wants), for an SGD optimiser with lr = BASE_LR. The cosine cases also have
<case>.closed_form.npy: _get_closed_form_lr() at the same epochs, the values headwise computes;
torch's step() follows a recursive form, equal up to rounding. The cases are listed in CASES
below, and the C++ test builds the same schedules by name.
"""

import pathlib
import shutil
import warnings

import numpy as np
import torch
from torch.optim import lr_scheduler as sched

OUT = pathlib.Path(__file__).resolve().parent / "lr_schedule"
BASE_LR = 0.1
STEPS = 30


def lambda_factor(epoch):
    return 1.0 / (1.0 + 0.1 * epoch)


# name -> function of the optimiser giving the scheduler.
CASES = {
    "constant": lambda o: sched.ConstantLR(o, factor=1.0 / 3, total_iters=5),
    "linear": lambda o: sched.LinearLR(o, start_factor=0.25, end_factor=1.0, total_iters=10),
    "linear_decay": lambda o: sched.LinearLR(o, start_factor=1.0, end_factor=0.0,
                                             total_iters=20),
    "cosine": lambda o: sched.CosineAnnealingLR(o, T_max=12, eta_min=0.001),
    "cosine_zero": lambda o: sched.CosineAnnealingLR(o, T_max=30),
    "step": lambda o: sched.StepLR(o, step_size=4, gamma=0.5),
    "multistep": lambda o: sched.MultiStepLR(o, milestones=[5, 12, 12, 20], gamma=0.3),
    "lambda": lambda o: sched.LambdaLR(o, lr_lambda=lambda_factor),
    "warmup_cosine": lambda o: sched.SequentialLR(
        o, [sched.LinearLR(o, start_factor=0.01, end_factor=1.0, total_iters=5),
            sched.CosineAnnealingLR(o, T_max=25, eta_min=1e-4)], milestones=[5]),
    "warmup_linear": lambda o: sched.SequentialLR(
        o, [sched.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=6),
            sched.LinearLR(o, start_factor=1.0, end_factor=0.0, total_iters=24)], milestones=[6]),
    "three_phases": lambda o: sched.SequentialLR(
        o, [sched.ConstantLR(o, factor=0.5, total_iters=3), sched.StepLR(o, step_size=3, gamma=0.5),
            sched.CosineAnnealingLR(o, T_max=10)], milestones=[4, 12]),
}


def save(path, values):
    np.save(path, np.asarray(values, dtype=np.float64), allow_pickle=False)


def main():
    warnings.simplefilter("ignore")  # SequentialLR's step(0) warns that epochs are deprecated
    if OUT.exists():
        shutil.rmtree(OUT)
    OUT.mkdir()
    for name, make in CASES.items():
        p = torch.zeros(1, dtype=torch.float64, requires_grad=True)
        opt = torch.optim.SGD([p], lr=BASE_LR)
        s = make(opt)
        lrs = [s.get_last_lr()[0]]
        closed = [s._get_closed_form_lr()[0]] if name.startswith("cosine") else None
        for _ in range(STEPS):
            p.grad = torch.zeros_like(p)
            opt.step()
            s.step()
            assert s.get_last_lr()[0] == opt.param_groups[0]["lr"]
            lrs.append(s.get_last_lr()[0])
            if closed is not None:
                closed.append(s._get_closed_form_lr()[0])
        save(OUT / f"{name}.npy", lrs)
        if closed is not None:
            save(OUT / f"{name}.closed_form.npy", closed)
        print(name, " ".join(f"{v:.6g}" for v in lrs))


if __name__ == "__main__":
    main()
