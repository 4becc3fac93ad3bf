"""Hugging Face interop: checkpoints exported as directories ``transformers`` loads; Llama configs read.

The modules, highest first; a module imports only modules below it, never one above
(``tests/test_import_structure.py`` checks the order)::

    export     export --hf: the entry point (export_hf), as a plain Llama or with the modeling code
    bundle     the remote-code bundle: modeling.py and the engine modules it needs, as flat files
    card       what is published beside the weights: the tokenizer, the model card, the records
    llama      which architectures are a Llama, their LlamaConfig and weights
    directory  the export's directory: checked before any work, written all at once
    modeling   NasConfig and NasForCausalLM: the file every remote-code export holds as modeling_nas.py
    config     --arch config.json: a Hugging Face Llama config (or an export's own) read as an architecture

This file imports none of them: ``--arch config.json`` (:mod:`nas.hf.config`) loads no exporter.
"""
