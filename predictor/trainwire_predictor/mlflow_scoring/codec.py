"""MLflow's scoring protocol bodies to and from the data plane's requests and answers.

Inputs as ``mlflow models serve`` takes them (``mlflow.pyfunc.scoring_server``): a JSON object
with exactly one of ``dataframe_split`` (``{"columns", "data"}``), ``dataframe_records`` (a list of
row objects), ``instances`` or ``inputs`` (row objects, rows of values, or an object of columns),
and optional ``params``; or CSV with a header row. Answers are ``{"predictions": ...}``: a list of
values for one output, rows of values for a model's several outputs per row, and row objects for
named outputs, as MLflow encodes an array, a 2-D array and a DataFrame.
"""

from __future__ import annotations

import io
import json
from typing import Any

import numpy as np
import pandas as pd

from trainwire_core.errors import InvalidArgumentError
from trainwire_predictor.inference import InferenceRequest, InferenceResponse, InputTensor
from trainwire_predictor.models import TensorSpec

FORMATS = ("dataframe_split", "dataframe_records", "instances", "inputs")
CSV_TYPES = ("text/csv",)


def parse_body(body: bytes, content_type: str) -> pd.DataFrame | np.ndarray:
    """The request's input as a DataFrame (named columns) or a 2-D array (rows of values).

    Raises:
        InvalidArgumentError: Not JSON or CSV, no or several input formats, or a malformed one.
    """
    media = content_type.split(";", 1)[0].strip().lower()
    if media in CSV_TYPES:
        try:
            return pd.read_csv(io.BytesIO(body))
        except (ValueError, pd.errors.ParserError) as exc:
            raise InvalidArgumentError(f"the CSV body cannot be parsed: {exc}", field="body") from None
    if media and media != "application/json":
        raise InvalidArgumentError(
            f"content type {media!r} is not supported: use application/json or text/csv", field="content-type"
        )
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise InvalidArgumentError(f"the body is not JSON: {exc}", field="body") from None
    if not isinstance(doc, dict):
        raise InvalidArgumentError("the body must be a JSON object", field="body")
    given = [key for key in FORMATS if key in doc]
    if len(given) != 1:
        raise InvalidArgumentError(
            f"the body must hold exactly one of {', '.join(FORMATS)} (it holds {', '.join(given) or 'none'})",
            field="body",
        )
    key = given[0]
    value = doc[key]
    try:
        if key == "dataframe_split":
            if not isinstance(value, dict) or "data" not in value:
                raise InvalidArgumentError("dataframe_split must be an object with data (and columns)", field=key)
            return pd.DataFrame(value["data"], columns=value.get("columns"))
        if key == "dataframe_records":
            if not isinstance(value, list) or not all(isinstance(row, dict) for row in value):
                raise InvalidArgumentError("dataframe_records must be a list of row objects", field=key)
            return pd.DataFrame.from_records(value)
        return _tensor_input(value, key)
    except (ValueError, TypeError) as exc:
        raise InvalidArgumentError(f"{key} cannot be read as a table: {exc}", field=key) from None


def _tensor_input(value: Any, key: str) -> pd.DataFrame | np.ndarray:
    if isinstance(value, dict):
        return pd.DataFrame({name: np.asarray(column) for name, column in value.items()})
    if isinstance(value, list) and value and all(isinstance(row, dict) for row in value):
        return pd.DataFrame.from_records(value)
    if isinstance(value, list):
        arr = np.asarray(value)
        if arr.ndim == 1:
            arr = arr.reshape(-1, 1)
        if arr.ndim != 2 or arr.dtype == object:
            raise InvalidArgumentError(f"{key} must be rows of values of one length", field=key)
        return arr
    raise InvalidArgumentError(f"{key} must be a list or an object of columns", field=key)


def inference_request(
    data: pd.DataFrame | np.ndarray, inputs: list[TensorSpec], name: str, version: str
) -> InferenceRequest:
    """The data plane's request for ``data``, its columns matched to the model's inputs (by name, else position).

    Raises:
        InvalidArgumentError: A named input the data lacks, or a column count that does not match.
    """
    if len(inputs) == 1 and len(inputs[0].shape) == 2:
        spec = inputs[0]
        arr = data.to_numpy() if isinstance(data, pd.DataFrame) else data
        tensor = InputTensor(spec.name, spec.datatype, list(arr.shape), _values(arr, spec.datatype))
        return InferenceRequest(name, version, inputs=[tensor])
    if isinstance(data, pd.DataFrame) and not all(isinstance(c, int) for c in data.columns):
        missing = [spec.name for spec in inputs if spec.name not in data.columns]
        if missing:
            raise InvalidArgumentError(f"missing input column(s): {', '.join(missing)}", field="inputs")
        columns = [data[spec.name].to_numpy() for spec in inputs]
    else:
        arr = data.to_numpy() if isinstance(data, pd.DataFrame) else data
        if arr.shape[1] != len(inputs):
            raise InvalidArgumentError(
                f"the rows have {arr.shape[1]} values; the model takes {len(inputs)} columns "
                f"({', '.join(spec.name for spec in inputs)})",
                field="inputs",
            )
        columns = [arr[:, i] for i in range(arr.shape[1])]
    tensors = [
        InputTensor(spec.name, spec.datatype, [len(column)], _values(column, spec.datatype))
        for spec, column in zip(inputs, columns, strict=True)
    ]
    return InferenceRequest(name, version, inputs=tensors)


def _values(arr: np.ndarray, datatype: str) -> list[Any]:
    """Row-major elements as the data plane's decoder takes them (strings for BYTES)."""
    flat = np.asarray(arr).reshape(-1)
    if datatype == "BYTES":
        return [v if isinstance(v, str | bytes) else str(v) for v in flat.tolist()]
    return flat.tolist()


def encode_predictions(response: InferenceResponse) -> dict[str, Any]:
    """``{"predictions": ...}`` as ``mlflow models serve`` writes a model's output."""
    outputs = response.outputs
    if len(outputs) == 1:
        return {"predictions": outputs[0][1].tolist()}
    names = [name for name, _ in outputs]
    if all(name.startswith("predictions_") for name in names):
        return {"predictions": np.column_stack([arr for _, arr in outputs]).tolist()}
    columns = {name: arr.tolist() for name, arr in outputs}
    rows = len(outputs[0][1]) if outputs else 0
    return {"predictions": [{name: columns[name][i] for name in names} for i in range(rows)]}
