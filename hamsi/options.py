"""EngineOptions: what both engines take besides the problem and the cover, one documented field each."""

from __future__ import annotations

from dataclasses import asdict, dataclass

# The step 1/beta_t = (eta t)^-gamma (thesis eq. 3.5): a LARGER eta gives SMALLER steps.
HAMSI_ETA = 0.06
GD_ETA = 0.001
GAMMA = 0.51
METHODS = ("hamsi", "mbgd")


@dataclass(frozen=True)
class EngineOptions:
    """The options of one HAMSI (thesis Alg. 3) or mini-batch GD run, in process or on Dask.

    method: "hamsi" or "mbgd". schedule: "det" (cycle through the subsets) or "stoch" (draw them).
    eta, gamma: the step 1/(eta t)^gamma (eta None: HAMSI_ETA, or GD_ETA for mbgd); eta_gd: the
    gradient steps of HAMSI's first cycle. memory: the L-BFGS memory M (pairs kept; 1 for mbgd).
    random_state: seeds the start and the stochastic schedule. Stop rules (hamsi.stop_rules), the
    first that fires: max_cycles cycles, max_time seconds, relative objective change <= tol, train
    error <= target, `patience` cycles without validation gain. safeguard: the divergence guard
    of hamsi.stepper (False: thesis Alg. 3 exactly).
    """

    method: str = "hamsi"
    schedule: str = "det"
    eta: float | None = None
    gamma: float = GAMMA
    eta_gd: float = GD_ETA
    memory: int = 5
    random_state: object = None
    max_cycles: int | None = 100
    max_time: float | None = None
    tol: float = 0.0
    target: float | None = None
    patience: int | None = None
    safeguard: bool = True

    def __post_init__(self):
        if self.method not in METHODS:
            raise ValueError(f"method must be one of {METHODS}; got {self.method!r}")

    @property
    def step_eta(self) -> float:
        """Return eta, or the method's default when it is None."""
        if self.eta is not None:
            return float(self.eta)
        return HAMSI_ETA if self.method == "hamsi" else GD_ETA

    def keywords(self) -> dict:
        """Return the fields as keywords (hamsi.optimizer.minimize_hamsi and cluster.driver.minimize_hamsi)."""
        return asdict(self)

    @classmethod
    def split(cls, keywords: dict) -> tuple[EngineOptions, dict]:
        """Return (EngineOptions of the keywords that name a field, the other keywords)."""
        names = cls.__dataclass_fields__
        return (
            cls(**{k: v for k, v in keywords.items() if k in names}),
            {k: v for k, v in keywords.items() if k not in names},
        )
