"""How each correctness trial's inputs are drawn.

Every trial starts from the reference's own get_inputs() under a seed the
judge derives from kboxd's secret seed. Trials after the first then reshape
the floating-point values' distribution, so a candidate tuned to standard
normal inputs (a lookup table, an approximation valid near 0, a special case
for |x| < 3) is tested off that distribution too. Every transform keeps each
element's sign and zeros, so inputs that must be positive (variances,
probabilities, log arguments) stay valid; integer and boolean tensors (indices,
masks, targets) are never touched.
"""
import math

import torch


AS_DRAWN = "as-drawn"
SCALED = "scaled"              # the whole tensor times a factor in [1/2, 2]
HEAVY_TAILED = "heavy-tailed"  # each element times exp(0.75 * N(0, 1))
RANGE_UNIFORM = "range-uniform"  # magnitudes uniform up to the largest drawn one, sign kept

# Trial i uses DISTRIBUTIONS[i % 4]: trial 0 is always the reference's own draw.
DISTRIBUTIONS = (AS_DRAWN, SCALED, HEAVY_TAILED, RANGE_UNIFORM)


def for_trial(i):
    return DISTRIBUTIONS[i % len(DISTRIBUTIONS)]


def _transform(x, name, gen):
    # The arithmetic is that of the first version, which drew everything on
    # the CPU (same draws, same float64 operations, in place where that
    # changes no bit), so a CPU tensor gets the very same values.
    if name == SCALED:
        factor = math.exp((torch.rand((), generator=gen, dtype=torch.float64, device=x.device).item() * 2 - 1)
                          * math.log(2.0))
        return x * factor
    if name == HEAVY_TAILED:
        noise = torch.randn(x.shape, generator=gen, dtype=torch.float64, device=x.device)
        return noise.mul_(0.75).exp_().mul_(x).to(x.dtype)
    if name == RANGE_UNIFORM:
        if x.numel() < 2:
            return x
        finite = torch.isfinite(x)
        # The largest finite magnitude, without gathering the finite values.
        mag_count = torch.stack([torch.where(finite, x.abs(), torch.zeros_like(x)).max().to(torch.float64),
                                 finite.sum().to(torch.float64)])
        mag, count = mag_count.tolist()
        if count < 2:
            return x
        u = torch.rand(x.shape, generator=gen, dtype=torch.float64, device=x.device).mul_(mag)
        # Magnitudes uniform up to the drawn maximum; signs and zeros as drawn.
        return u.mul_(torch.sign(x)).to(x.dtype)
    return x


def transform(inputs, name, seed):
    """The input structure with every floating-point tensor's values redrawn
    per `name`, on the tensor's own device (no copy to the host and back),
    from a generator of that device seeded with `seed`: the same seed gives
    the same values on every host with the same kind of device (the CPU's
    generator, or CUDA's counter-based Philox, whose draws depend on the seed
    and the shape, not on the GPU model)."""
    if name == AS_DRAWN:
        return inputs
    generators = {}

    def generator(device):
        if device not in generators:
            generators[device] = torch.Generator(device=device)
            generators[device].manual_seed(seed)
        return generators[device]

    def one(x):
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            with torch.no_grad():
                return _transform(x.detach(), name, generator(x.device))
        if isinstance(x, (list, tuple)):
            return type(x)(one(v) for v in x)
        return x
    return one(inputs)


# -- copies ---------------------------------------------------------------------------

def clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(clone(v) for v in x)
    return x
