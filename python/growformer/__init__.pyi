# Type stub of the package growformer (its C++ core growformer._core and its Python parts).
# tests/python/test_stub.py checks its public names, their members and parameters against the
# module, both ways; names starting with _ are the stub's own (the shapes of the dicts).
import os
from typing import Any, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple, TypedDict, Union

import numpy as np
import numpy.typing as npt

_Path = Union[str, bytes, "os.PathLike[str]"]

class ConfigError(ValueError):
    """A configuration the program refuses; a policy's own exception is its __cause__."""

class RunError(RuntimeError):
    """A run that failed; a policy's own exception is its __cause__."""

class Config:
    """A configuration: a YAML file, YAML text or a dict, plus KEY=VALUE overrides."""

    @staticmethod
    def load(path: _Path, overrides: Sequence[str] = ...) -> Config: ...
    @staticmethod
    def from_dict(config: Mapping[str, Any], overrides: Sequence[str] = ...,
                  base_dir: _Path = ...) -> Config: ...
    @staticmethod
    def from_yaml(text: str, overrides: Sequence[str] = ..., base_dir: _Path = ...) -> Config: ...
    def set(self, assignment: str) -> Config: ...
    @property
    def overrides(self) -> List[str]: ...
    def yaml(self) -> str: ...
    def to_dict(self) -> Dict[str, Any]: ...

class _StepMetrics(TypedDict):
    """What a train or resume callback gets."""

    step: int
    total_steps: int
    loss: float
    accuracy: float
    steps: int
    lr: float
    heads: List[int]
    val_step: Optional[int]
    val_loss: Optional[float]
    val_accuracy: Optional[float]

class _TestResult(TypedDict):
    """The final test of a finished run."""

    loss: Optional[float]
    accuracy: Optional[float]
    examples: int
    majority_class_accuracy: Optional[float]
    model: str
    evaluated_on: str
    heads: List[int]

class _RunResult(TypedDict):
    """What Experiment.train and resume return (the same keys for a finished and a stopped run)."""

    status: int
    run_dir: str
    finished: bool
    stopped_at: Optional[int]
    best_val: Optional[float]
    test: Optional[_TestResult]
    growth_summary: Optional[Dict[str, Union[int, float]]]
    pruning_summary: Optional[Dict[str, Union[int, float]]]

class _HeadInfo(TypedDict):
    """One head of Experiment.heads()."""

    id: int
    born: int
    tensors: Dict[str, npt.NDArray[np.float32]]

_Callback = Callable[[_StepMetrics], Optional[bool]]

class Images:
    """Images given in memory: uint8 pixels (N, H, W), or (N, H*W) with shape=(H, W)."""

    def __init__(self, pixels: npt.ArrayLike, shape: Optional[Tuple[int, int]] = ...) -> None: ...
    @property
    def pixels(self) -> npt.NDArray[np.uint8]: ...

# data in memory: one split is (inputs, labels) or a pandas DataFrame with text and label columns;
# inputs are texts or token id sequences (or a 2-D int array), or images (Images, a 3-D uint8
# array), labels str or int
_Inputs = Union[Sequence[str], Sequence[Sequence[int]], npt.NDArray[Any], Images]
_Labels = Union[Sequence[str], Sequence[int], npt.NDArray[Any]]
_Split = Union[Tuple[_Inputs, _Labels], Any]
_Data = Union[_Split, Mapping[str, _Split]]

class _ClassFigures(TypedDict):
    """One class of an evaluation."""

    name: str
    precision: float
    recall: float
    f1: float
    support: int

class _EvalResult(TypedDict):
    """What Experiment.evaluate returns (the figures of `growformer eval --json`)."""

    loss: float
    accuracy: float
    macro_f1: float
    examples: int
    classes: List[_ClassFigures]
    confusion: List[List[int]]
    split: str

class Experiment:
    """Everything a config builds: data, model, optimizer, growth and pruning."""

    def __init__(self, config: Union[Config, _Path, Mapping[str, Any]],
                 overrides: Sequence[str] = ..., plugin_paths: Sequence[_Path] = ...,
                 data: Optional[_Data] = ...) -> None: ...
    def train(self, run_dir: _Path, callback: Optional[_Callback] = ..., every: int = ...,
              stop_after: int = ..., quiet: bool = ..., data: Optional[_Data] = ...) -> _RunResult: ...
    def evaluate(self, data: Union[str, _Path, _Split] = ..., max_batches: int = ...) -> _EvalResult: ...
    def predict(self, inputs: Union[Iterable[str], Iterable[Sequence[int]], Iterable[npt.ArrayLike], Any],
                batch_size: int = ..., logits: bool = ...) -> npt.NDArray[np.float64]: ...
    def tokenize(self, texts: Iterable[str]) -> List[List[int]]: ...
    def predict_file(self, path: _Path,
                     batch_size: int = ...) -> Tuple[List[str], npt.NDArray[np.float64]]: ...
    def parameters(self) -> Dict[str, npt.NDArray[np.float32]]: ...
    def heads(self) -> List[List[_HeadInfo]]: ...
    def split_tokens(self, split: str) -> Tuple[List[List[int]], List[int]]: ...
    @property
    def name(self) -> str: ...
    @property
    def classes(self) -> List[str]: ...
    @property
    def vocab(self) -> List[str]: ...
    @property
    def vocab_size(self) -> int: ...
    @property
    def pad_id(self) -> int: ...
    @property
    def heads_per_block(self) -> List[int]: ...
    @property
    def num_parameters(self) -> int: ...
    @property
    def precision(self) -> str: ...
    @property
    def config(self) -> str: ...
    @property
    def data_sizes(self) -> Dict[str, int]: ...

def load(checkpoint: _Path, data: Optional[str] = ...,
         plugin_paths: Sequence[_Path] = ..., trust_plugins: bool = ...,
         precision: Optional[str] = ...) -> Experiment: ...
def resume(run_dir: _Path, callback: Optional[_Callback] = ..., every: int = ...,
           stop_after: int = ..., quiet: bool = ...,
           plugin_paths: Sequence[_Path] = ...) -> _RunResult: ...
def read_events(run_dir: _Path) -> List[Dict[str, Any]]: ...
def read_metrics(run_dir: _Path) -> List[Dict[str, Any]]: ...
def read_sweep(sweep_dir: _Path) -> List[Dict[str, Any]]: ...
def to_torch(model: Experiment, dtype: Any = ...) -> Any: ...
def to_onnx(model: Experiment, path: _Path, opset_version: int = ...) -> str: ...
def add_head(block: int, reason: str = ..., preserve_function: bool = ...,
             value_variance: Optional[float] = ..., **info: Any) -> Dict[str, Any]: ...
def remove_head(block: int, head: int, reason: str = ..., **info: Any) -> Dict[str, Any]: ...
# The head id that names a whole block in probe_ablations: (block, WHOLE_BLOCK).
WHOLE_BLOCK: int

__all__: List[str]
