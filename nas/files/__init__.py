"""The files the tool reads and writes for a user: architecture files, checkpoints, YAML, paths, outputs.

    archfile    architecture files: YAML holding an ArchConfig and how to train it
    checkpoint  trained weights with their architecture (safetensors or torch.save of plain data)
    yamlsafe    the one YAML reader: plain data only, bounded in size, depth and expansion
    paths       where a path a user wrote is read from (relative to the file that names it)
    outputs     the one rule for every file a command writes: new files, never a user's

This file imports none of them (``nas.files.yamlsafe`` stays torch-free).
"""
