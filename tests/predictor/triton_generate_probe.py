"""Streams a generation from a predictor with the real ``tritonclient.grpc`` (run as a subprocess).

Usage: python triton_generate_probe.py ADDRESS MODEL PROMPT MAX_TOKENS TOKEN
Prints one JSON line: the streamed token texts, each response's final flag, errors,
and the unary ModelInfer's whole text.
"""

from __future__ import annotations

import json
import queue
import sys

import numpy as np
import tritonclient.grpc as grpcclient


def inputs(prompt: str) -> list:
    text = grpcclient.InferInput("text_input", [1], "BYTES")
    text.set_data_from_numpy(np.array([prompt.encode()], dtype=object))
    return [text]


def main() -> None:
    address, model, prompt, max_tokens, token = sys.argv[1:6]
    headers = {"authorization": f"Bearer {token}"}
    parameters = {"max_tokens": int(max_tokens), "temperature": 0.0}
    client = grpcclient.InferenceServerClient(address)
    answers: queue.Queue = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)), headers=headers)
    client.async_stream_infer(model, inputs(prompt), request_id="g1", parameters=parameters)
    tokens, final, errors = [], [], []
    while True:
        result, error = answers.get(timeout=60)
        if error is not None:
            errors.append(str(error))
            break
        response = result.get_response()
        tokens.append(result.as_numpy("text_output")[0].decode())
        final.append(response.parameters["triton_final_response"].bool_param)
        if final[-1]:
            break
    client.stop_stream()
    unary = client.infer(model, inputs(prompt), parameters=parameters, headers=headers)
    print(
        json.dumps(
            {"tokens": tokens, "final": final, "errors": errors, "unary": unary.as_numpy("text_output")[0].decode()}
        )
    )


if __name__ == "__main__":
    main()
