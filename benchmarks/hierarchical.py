"""Issue 40, acceptance 2: a two-level model with 20 group intercepts inside the likelihood, N = 2·10⁴.

Model: ``y_i ~ N(a[g_i] + b x_i, sigma^2)``, ``a_g ~ N(mu_a, sigma_a^2)`` (a plate of G = 20),
``mu_a ~ N(0, 5^2)``, ``sigma_a ~ HalfNormal(2)``, ``b ~ N(0, 5^2)``, ``sigma ~ HalfNormal(2)``.
Data (seed 100): ``g_i = i mod 20``, ``x_i ~ U(-1, 1)``, ``a_true ~ N(1, 0.5^2)``, ``b = 0.7``,
``sigma = 0.5``. Reference: NUTS (1000 samples after 500 warmup, seed 0), cached at
``$HIER_REF`` (default ``results/hierarchical_ref.pt``; computed on first use, ~minutes).
Each run: ``MCMC(K, num_samples=1000, warmup_steps=500)`` with only ``epsilon`` given (and
``jit_compile=True``); printed: the worst |mean error| / NUTS sd over every coordinate, the range of
sd / NUTS sd, per-site errors, wall time and the number of pyro_dp warnings.

    python benchmarks/hierarchical.py EPS KERNEL MODE SEED
    # KERNEL: DPPenalty | DPHMC | ... ; MODE: plain | scale | whiten | whitenonly | grouped | ref
    python benchmarks/hierarchical.py 8 DPPenalty grouped 0   # DPGroupedPenalty(model, group_site="a", epsilon=8)

MODE ``grouped`` runs :class:`pyro_dp.DPGroupedPenalty` (parallel per-group penalty updates of the
intercepts ``a``; KERNEL is ignored; ``GROUP_CLIP=5`` sets its ``group_llr_clip`` by hand). Results:
``docs/kernels/grouped.md``, "Measured".
"""
import sys, os, time, math, warnings, torch, pyro, pyro.distributions as dist
from pyro.infer import MCMC, NUTS
import pyro_dp
torch.set_num_threads(1)
warnings.simplefilter("ignore")
G, N = 20, 20_000
eps = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
kern = sys.argv[2] if len(sys.argv) > 2 else "DPPenalty"
mode = sys.argv[3] if len(sys.argv) > 3 else "plain"
seed = int(sys.argv[4]) if len(sys.argv) > 4 else 0
g = torch.Generator().manual_seed(100)
grp = torch.arange(N) % G
x = torch.rand(N, generator=g, dtype=torch.float64) * 2 - 1
a_true = 1.0 + 0.5 * torch.randn(G, generator=g, dtype=torch.float64)
y = a_true[grp] + 0.7 * x + 0.5 * torch.randn(N, generator=g, dtype=torch.float64)

def model(grp, x, y):
    mu_a = pyro.sample("mu_a", dist.Normal(torch.tensor(0.0, dtype=x.dtype), 5.0))
    sigma_a = pyro.sample("sigma_a", dist.HalfNormal(torch.tensor(2.0, dtype=x.dtype)))
    b = pyro.sample("b", dist.Normal(torch.tensor(0.0, dtype=x.dtype), 5.0))
    sigma = pyro.sample("sigma", dist.HalfNormal(torch.tensor(2.0, dtype=x.dtype)))
    with pyro.plate("groups", G):
        a = pyro.sample("a", dist.Normal(mu_a, sigma_a))
    with pyro.plate("data", y.shape[0]):
        pyro.sample("y", dist.Normal(a[grp] + b * x, sigma), obs=y)

REF = os.environ.get("HIER_REF", "results/hierarchical_ref.pt")
os.makedirs(os.path.dirname(REF) or ".", exist_ok=True)
if mode == "ref" or not os.path.exists(REF):
    pyro.set_rng_seed(0)
    m = MCMC(NUTS(model), num_samples=1000, warmup_steps=500, disable_progbar=True)
    m.run(grp, x, y)
    s = m.get_samples()
    torch.save({k: (v.mean(0), v.std(0)) for k, v in s.items()}, REF)
ref = torch.load(REF)
if mode == "ref":
    sys.exit()
kw = {}
if mode == "scale":
    from pyro_dp.default_path.tuning import DPAutoTune
    kw["init"] = DPAutoTune(scale=True)
if mode == "whitenonly":
    from pyro_dp.default_path.tuning import DPAutoTune
    kw["init"] = DPAutoTune(whiten=True, scale=False)
if mode == "whiten":
    from pyro_dp.default_path.tuning import DPAutoTune
    kw["init"] = DPAutoTune(whiten=True)
if mode == "grouped":
    kern = "DPGroupedPenalty"
    gkw = {"group_llr_clip": float(os.environ["GROUP_CLIP"])} if os.environ.get("GROUP_CLIP") else {}
    K = pyro_dp.DPGroupedPenalty(model, group_site="a", epsilon=eps, jit_compile=True, **gkw)
else:
    K = getattr(pyro_dp, kern)(model, epsilon=eps, jit_compile=True, **kw)
t = time.time()
m = MCMC(K, num_samples=1000, warmup_steps=500, disable_progbar=True)
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    m.run(grp, x, y)
s = m.get_samples()
ws_ = [str(w.message)[:200] for w in ws if type(w.message).__module__.startswith("pyro_dp")]
worst, ratios = 0.0, []
for k, (mu, sd) in ref.items():
    e = ((s[k].mean(0) - mu).abs() / sd).max().item()
    worst = max(worst, e)
    ratios.append((s[k].std(0) / sd).reshape(-1))
r = torch.cat(ratios)
errs = {k: round(((s[k].mean(0) - mu).abs() / sd).max().item(), 2) for k, (mu, sd) in ref.items()}
print(f"{kern} eps={eps} {mode} seed={seed}: worst mean err {worst:.2f} sd ratio {r.min():.2f}-{r.max():.2f} "
      f"per-site {errs} time {time.time()-t:.0f}s warnings {len(ws_)}")
for w in ws_[:4]:
    print("   ", w)
if mode == "grouped":
    print(f"    group scale {float(math.exp(K.group_walk.log_scale)):.3g}, group clip {K._group_clip():.3g}, "
          f"group acceptance {K.group_acceptance_rate}, "
          f"noise multiplier {K.noise_multiplier:.3g}, llr_clip {K.llr_clip:.3g}")
