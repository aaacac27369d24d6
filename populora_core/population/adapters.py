"""The adapter store: population members as standard PEFT LoRA adapters.

On disk, one generation's population is a directory::

    population/gen_0003/
        population.parquet            id, role, birth_generation, parents, operator, mu, sigma
                                      (artifact ``population``: run_id, generation, schema_version)
        teacher-g0000-0/
            adapter_config.json       PEFT LoraConfig
            adapter_model.safetensors lora_A / lora_B per module (PEFT key names)
            optimizer.pt              optimizer state, when the member has trained

loadable unchanged by ``peft.PeftModel.from_pretrained`` and by vLLM, on any
machine: ``base_model_name_or_path`` names the base portably (a hub id, or the
path as the user gave it), never the local cache it was loaded from. A
snapshot is written into a temporary sibling directory and renamed into place,
so a reader never sees half a population.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import pandas as pd
import torch
from safetensors.torch import load_file, save_file

from populora_core.config import PopulationConfig, RatingConfig
from populora_core.models import portable_base_model
from populora_core.population.lora import LoraAdapter, LoraFactors
from populora_core.rundir.artifacts import write_artifact, write_dir_atomic, write_file_atomic, write_text_atomic
from populora_core.rundir.links import link_tree
from populora_core.seams import SNAPSHOT_LINK, seam
from populora_core.seeding import torch_generator

Role = Literal["teacher", "student"]
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
OPTIMIZER_STATE = "optimizer.pt"
POPULATION_ARTIFACT = "population"
POPULATION_TABLE = f"{POPULATION_ARTIFACT}.parquet"
HALL_ARTIFACT = "hall"
HALL_DIR = "hall"
"""A snapshot's hall of fame (``population.replacement.next_hall``): ``hall.parquet`` beside
population.parquet (the same columns, one row per entry) and ``hall/<entry id>/`` weights."""
PEFT_PREFIX = "base_model.model."


@dataclass(frozen=True)
class Member:
    """One adapter of the population and its standing."""

    adapter_id: str
    role: Role
    birth_generation: int
    mu: float
    sigma: float
    parents: tuple[str, ...] = ()
    operator: str = "init"
    roles: tuple[Role, ...] = field(default=())
    """Every role this adapter plays: (role,) in a population, both in the single-agent baseline."""

    def __post_init__(self) -> None:
        if not self.roles:
            object.__setattr__(self, "roles", (self.role,))

    def plays(self, role: Role) -> bool:
        return role in self.roles

    @property
    def conservative(self) -> float:
        """The rank used for replacement: μ − 3σ."""
        return conservative(self.mu, self.sigma)


def conservative(mu: float, sigma: float) -> float:
    """The conservative skill estimate μ − 3σ that ranks members for replacement."""
    return mu - 3.0 * sigma


def lora_shapes(model_config: Mapping, target_modules: Sequence[str]) -> dict[str, tuple[int, int]]:
    """(d_out, d_in) per module path for a Llama/Qwen2-style decoder config."""
    hidden = int(model_config["hidden_size"])
    inter = int(model_config["intermediate_size"])
    heads = int(model_config["num_attention_heads"])
    kv_heads = int(model_config.get("num_key_value_heads") or heads)
    head_dim = int(model_config.get("head_dim") or hidden // heads)
    dims = {
        "q_proj": (heads * head_dim, hidden),
        "k_proj": (kv_heads * head_dim, hidden),
        "v_proj": (kv_heads * head_dim, hidden),
        "o_proj": (hidden, heads * head_dim),
        "gate_proj": (inter, hidden),
        "up_proj": (inter, hidden),
        "down_proj": (hidden, inter),
    }
    unknown = [m for m in target_modules if m not in dims]
    if unknown:
        raise ValueError(f"lora_shapes knows {sorted(dims)}; cannot size {unknown}")
    parent = {"q_proj": "self_attn", "k_proj": "self_attn", "v_proj": "self_attn", "o_proj": "self_attn"}
    return {
        f"model.layers.{i}.{parent.get(m, 'mlp')}.{m}": dims[m]
        for i in range(int(model_config["num_hidden_layers"]))
        for m in target_modules
    }


def lora_shapes_from_model(model: torch.nn.Module, target_modules: Sequence[str]) -> dict[str, tuple[int, int]]:
    """(d_out, d_in) per module path, read off a loaded model's Linear layers."""
    targets = set(target_modules)
    shapes = {
        name: (mod.out_features, mod.in_features)
        for name, mod in model.named_modules()
        if isinstance(mod, torch.nn.Linear) and name.split(".")[-1] in targets
    }
    if not shapes:
        raise ValueError(f"no Linear module named any of {sorted(targets)} in the model")
    return shapes


def init_adapter(shapes: Mapping[str, tuple[int, int]], config: PopulationConfig, gen: torch.Generator) -> LoraAdapter:
    """New factors: A Kaiming-uniform as in PEFT (bound 1/√d_in); B = 0 under
    ``init="peft"``, B ~ N(0, init_b_std²) under ``init="gaussian_b"``."""
    r = config.rank
    modules = {}
    for name in sorted(shapes):
        d_out, d_in = shapes[name]
        bound = 1.0 / math.sqrt(d_in)
        A = (torch.rand((r, d_in), generator=gen) * 2 - 1) * bound
        if config.init == "peft":
            B = torch.zeros((d_out, r))
        else:
            B = torch.randn((d_out, r), generator=gen) * config.init_b_std
        modules[name] = LoraFactors(A=A, B=B)
    return LoraAdapter(modules=modules, rank=r, alpha=config.alpha)


def create_population(
    config: PopulationConfig, rating: RatingConfig, shapes: Mapping[str, tuple[int, int]], seed: int
) -> tuple[list[Member], dict[str, LoraAdapter]]:
    """Generation 0: ``teachers`` + ``students`` members (or one adapter in both
    roles for the single-agent baseline), each initialised from its own seed."""
    if config.single_agent:
        plan: list[tuple[str, Role, tuple[Role, ...]]] = [("agent-g0000-0", "teacher", ("teacher", "student"))]
    else:
        plan = [(f"teacher-g0000-{i}", "teacher", ("teacher",)) for i in range(config.teachers)]
        plan += [(f"student-g0000-{i}", "student", ("student",)) for i in range(config.students)]
    members, adapters = [], {}
    for adapter_id, role, roles in plan:
        adapters[adapter_id] = init_adapter(shapes, config, torch_generator(seed, 0, adapter_id, "init"))
        members.append(Member(adapter_id, role, 0, rating.mu, rating.sigma, roles=roles))
    return members, adapters


def peft_config(adapter: LoraAdapter, base_model: str) -> dict:
    """PEFT's LoraConfig of ``adapter``; ``base_model`` (a reference or a resolved path) is
    written portably (``models.portable_base_model``) so that the adapter travels."""
    targets = sorted({name.split(".")[-1] for name in adapter.modules})
    return {
        "peft_type": "LORA",
        "task_type": "CAUSAL_LM",
        "base_model_name_or_path": portable_base_model(base_model),
        "r": adapter.rank,
        "lora_alpha": adapter.alpha,
        "lora_dropout": 0.0,
        "target_modules": targets,
        "bias": "none",
        "fan_in_fan_out": False,
        "inference_mode": True,
        "init_lora_weights": True,
        "modules_to_save": None,
        "use_rslora": False,
        "use_dora": False,
    }


def save_adapter(adapter: LoraAdapter, directory: Path, base_model: str = "") -> None:
    """Writes ``adapter`` in PEFT format into ``directory`` (created), each file under a temp
    name renamed into place: never written in place, so a new version is a new file (what
    ``inference.base.adapter_digest`` relies on) and a hard link to the old one is left alone."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    tensors = {}
    for name, f in adapter:
        tensors[f"{PEFT_PREFIX}{name}.lora_A.weight"] = f.A.detach().to(torch.float32).contiguous()
        tensors[f"{PEFT_PREFIX}{name}.lora_B.weight"] = f.B.detach().to(torch.float32).contiguous()
    write_file_atomic(directory / ADAPTER_WEIGHTS, lambda tmp: save_file(tensors, str(tmp)))
    write_text_atomic(json.dumps(peft_config(adapter, base_model), indent=2), directory / ADAPTER_CONFIG)


def load_adapter(directory: Path) -> LoraAdapter:
    """Reads a PEFT LoRA adapter directory back into factors."""
    directory = Path(directory)
    cfg = json.loads((directory / ADAPTER_CONFIG).read_text())
    tensors = load_file(str(directory / ADAPTER_WEIGHTS))
    modules: dict[str, LoraFactors] = {}
    for key in sorted(tensors):
        if not key.endswith(".lora_A.weight"):
            continue
        name = key.removeprefix(PEFT_PREFIX).removesuffix(".lora_A.weight")
        b_key = f"{PEFT_PREFIX}{name}.lora_B.weight"
        modules[name] = LoraFactors(A=tensors[key], B=tensors[b_key])
    return LoraAdapter(modules=modules, rank=int(cfg["r"]), alpha=float(cfg["lora_alpha"]))


def save_optimizer_state(directory: Path, state: dict) -> None:
    """Optimizer state beside the adapter (temp file + rename)."""
    write_file_atomic(Path(directory) / OPTIMIZER_STATE, lambda tmp: torch.save(state, tmp))


def load_optimizer_state(directory: Path) -> dict | None:
    path = Path(directory) / OPTIMIZER_STATE
    # on the CPU: a state saved where the model ran on a GPU loads on any machine
    return torch.load(path, map_location="cpu", weights_only=True) if path.exists() else None


def members_frame(members: Sequence[Member]) -> pd.DataFrame:
    """The payload of artifact ``population``: one row per member."""
    return pd.DataFrame(
        {
            "adapter_id": [m.adapter_id for m in members],
            "role": [m.role for m in members],
            "roles": [list(m.roles) for m in members],
            "birth_generation": [m.birth_generation for m in members],
            "parents": [list(m.parents) for m in members],
            "operator": [m.operator for m in members],
            "mu": [m.mu for m in members],
            "sigma": [m.sigma for m in members],
            "conservative": [m.conservative for m in members],
        }
    )


def members_from_frame(frame: pd.DataFrame) -> list[Member]:
    """Members from a population.parquet frame (meta columns, present or not, are ignored)."""
    return [
        Member(
            adapter_id=row.adapter_id,
            role=row.role,
            birth_generation=int(row.birth_generation),
            mu=float(row.mu),
            sigma=float(row.sigma),
            parents=tuple(row.parents),
            operator=row.operator,
            roles=tuple(row.roles),
        )
        for row in frame.itertuples(index=False)
    ]


def save_population(
    directory: Path,
    generation: int,
    members: Sequence[Member],
    adapters: Mapping[str, LoraAdapter],
    *,
    base_model: str = "",
    link_from: Path | None = None,
    run_id: str | None = None,
    hall: Mapping[Member, Path] | None = None,
) -> Path:
    """Writes one generation's snapshot into ``directory`` atomically (replacing an older
    one); returns it.

    ``link_from``: a directory of adapter directories (the generation's ``updated/``):
    a member found there is hard-linked from it with its optimizer state (``adapters``
    must hold that same adapter, as loaded from there), not written again; the others
    (evolution's children) are written.
    ``run_id`` stamps population.parquet; by default the run directory's name, as a
    snapshot lives at ``<run>/population/gen_NNNN``.
    ``hall``: the hall of fame, each entry with the adapter directory its weights are
    hard-linked from (no optimizer state); none: no hall.parquet.
    """
    run_id = run_id if run_id is not None else Path(directory).absolute().parent.parent.name

    def fill(tmp: Path) -> None:
        for m in members:
            source = Path(link_from) / m.adapter_id if link_from is not None else None
            if source is not None and (source / ADAPTER_WEIGHTS).is_file():
                tmp.joinpath(m.adapter_id).mkdir()
                seam(SNAPSHOT_LINK, tmp / m.adapter_id)
                for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS, OPTIMIZER_STATE):
                    if (source / name).is_file():
                        link_tree(source / name, tmp / m.adapter_id / name)
            else:
                save_adapter(adapters[m.adapter_id], tmp / m.adapter_id, base_model)
        write_artifact(members_frame(members), tmp, POPULATION_ARTIFACT, run_id=run_id, generation=generation)
        if hall is not None:
            for entry, source in hall.items():
                tmp.joinpath(HALL_DIR, entry.adapter_id).mkdir(parents=True)
                for name in (ADAPTER_CONFIG, ADAPTER_WEIGHTS):
                    link_tree(Path(source) / name, tmp / HALL_DIR / entry.adapter_id / name)
            write_artifact(members_frame(list(hall)), tmp, HALL_ARTIFACT, run_id=run_id, generation=generation)

    return write_dir_atomic(Path(directory), fill, replace=True)


def load_hall(directory: Path) -> list[Member]:
    """The hall of fame of the snapshot ``directory`` (empty before the first round, or in a
    snapshot written before halls existed)."""
    path = Path(directory) / f"{HALL_ARTIFACT}.parquet"
    return members_from_frame(pd.read_parquet(path)) if path.is_file() else []
