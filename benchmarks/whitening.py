r"""Posterior-shaped coordinates (#40): does whitening buy accuracy per epsilon?

Logistic regression, d = 5 features with pairwise correlation 0.8 scaled into the unit ball,
N = 5·10⁴, ``MCMC(K(model, epsilon=eps, jit_compile=True), num_samples=1000, warmup_steps=500)``
and these ways to run it:

* ``plain``: the default path as it is;
* ``private``: ``init=DPAutoTune(whiten=True)`` (``pyro_dp.default_path.whitening``: a private
  posterior-covariance estimate at the private start; the chain runs in the coordinates it
  whitens);
* ``scale``: ``init=DPAutoTune(scale=True)`` (the per-coordinate scales alone, no metric);
* ``none``: ``init=DPAutoTune(scale=False)`` (neither: the default path before #40's coordinates);
* ``oracle``: the model reparametrised by hand with the non-private Laplace fit (the best a
  private estimate could do; not private — a measurement only).

Reference: the Laplace approximation (MAP by Newton, inverse Hessian), which at this N is within
a few percent of the posterior (Bernstein–von Mises); reported: the worst |mean error| in
reference sds and the range of sd ratios. The privacy noise is from OS entropy, so repeated
runs differ: run several data seeds.

Run: ``python benchmarks/whitening.py EPS KERNEL MODE SEED [DATA]`` (e.g. ``8 DPPenalty private 0``;
10–100 s each on one thread). ``DATA``: ``correlated`` (default, the model above), ``unscaled``
(d = 3, the same construction with prior N(0, 10²), the columns then multiplied by 1, 30 and 1 000:
covariates on their own scales, ``docs/tuning.md``; ``benchmarks/unscaled.py`` runs it) or
``scaled3`` (the same d = 3 model with every column scale 1).
"""
import sys, time, warnings, torch, pyro, pyro.distributions as dist
from pyro.infer import MCMC
import pyro_dp
from pyro_dp.models.default_suite import make_correlated_logistic_data
torch.set_num_threads(1)
warnings.simplefilter("ignore")
N = 50_000
eps = float(sys.argv[1]) if len(sys.argv) > 1 else 8.0
kern = sys.argv[2] if len(sys.argv) > 2 else "DPPenalty"
mode = sys.argv[3] if len(sys.argv) > 3 else "plain"
seed = int(sys.argv[4]) if len(sys.argv) > 4 else 0
data = sys.argv[5] if len(sys.argv) > 5 else "correlated"
if data == "correlated":
    w_true, PRIOR_SD, SCALES = torch.tensor([1.0, -0.5, 0.8, 0.0, -1.2], dtype=torch.float64), 2.0, None
elif data in ("unscaled", "scaled3"):
    w_true, PRIOR_SD = torch.tensor([1.0, -0.5, 0.8], dtype=torch.float64), 10.0
    SCALES = torch.tensor([1.0, 30.0, 1000.0] if data == "unscaled" else [1.0, 1.0, 1.0], dtype=torch.float64)
else:
    sys.exit(f"DATA must be correlated, unscaled or scaled3, got {data!r}")
D = w_true.numel()
# the columns on their own scales (SCALES), the coefficients inversely: the same logits
X, y = make_correlated_logistic_data(N, seed, w=w_true, scales=SCALES)

def model(X, y):
    w = pyro.sample("w", dist.Normal(torch.zeros(D, dtype=X.dtype), PRIOR_SD).to_event(1))
    with pyro.plate("data", X.shape[0]):
        pyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)

# Laplace reference
w = torch.zeros(D, dtype=torch.float64, requires_grad=True)
def nlp(w):
    return -(dist.Bernoulli(logits=X @ w).log_prob(y).sum() + dist.Normal(0, PRIOR_SD).log_prob(w).sum())
for _ in range(30):
    l = nlp(w); gr, = torch.autograd.grad(l, w); H = torch.autograd.functional.hessian(nlp, w.detach())
    with torch.no_grad(): w -= torch.linalg.solve(H, gr)
H = torch.autograd.functional.hessian(nlp, w.detach()); Sig = torch.linalg.inv(H)
ref_mean, ref_sd = w.detach(), Sig.diag().sqrt()

if mode == "oracle":  # whitened by the (non-private) Laplace fit: the best case of a private one
    mu0, L = ref_mean.clone(), torch.linalg.cholesky(Sig)
    Linv = torch.linalg.inv(L)
    def umodel(X, y, mu0, L):
        # w = mu0 + L u; prior of u induced from w ~ N(0, PRIOR_SD^2 I)
        cov_u = PRIOR_SD ** 2 * Linv @ Linv.T
        u = pyro.sample("u", dist.MultivariateNormal(-Linv @ mu0, covariance_matrix=cov_u))
        w = mu0 + L @ u
        with pyro.plate("data", X.shape[0]):
            pyro.sample("y", dist.Bernoulli(logits=X @ w), obs=y)
    K = getattr(pyro_dp, kern)(umodel, epsilon=eps, jit_compile=True, public=["mu0", "L"] if False else [2, 3])
    args = (X, y, mu0, L)
elif mode == "private":
    from pyro_dp.default_path.tuning import DPAutoTune
    K = getattr(pyro_dp, kern)(model, epsilon=eps, jit_compile=True, init=DPAutoTune(whiten=True))
    args = (X, y)
elif mode == "scale":  # per-coordinate scales only (DPAutoTune(scale=True)), no metric
    from pyro_dp.default_path.tuning import DPAutoTune
    K = getattr(pyro_dp, kern)(model, epsilon=eps, jit_compile=True, init=DPAutoTune(scale=True))
    args = (X, y)
elif mode == "none":  # neither scales nor metric (the default path before #40's coordinates)
    from pyro_dp.default_path.tuning import DPAutoTune
    K = getattr(pyro_dp, kern)(model, epsilon=eps, jit_compile=True, init=DPAutoTune(scale=False))
    args = (X, y)
else:
    K = getattr(pyro_dp, kern)(model, epsilon=eps, jit_compile=True)
    args = (X, y)
t = time.time()
m = MCMC(K, num_samples=1000, warmup_steps=500, disable_progbar=True)
with warnings.catch_warnings(record=True) as ws:
    warnings.simplefilter("always")
    m.run(*args)
s = m.get_samples()
ws_ = [str(x.message)[:160] for x in ws if type(x.message).__module__.startswith("pyro_dp")]
if mode == "oracle":
    W = mu0 + s["u"] @ L.T
else:
    W = s["w"]
err = ((W.mean(0) - ref_mean).abs() / ref_sd)
ratio = W.std(0) / ref_sd
print(f"{kern} eps={eps} {mode} seed={seed} {data}: worst mean err {err.max():.2f} sd ratio {ratio.min():.2f}-{ratio.max():.2f} "
      f"eps_spent {K.get_epsilon(1e-5):.2f} time {time.time()-t:.0f}s warnings {len(ws_)}")
for x in ws_[:3]: print("   ", x)
