"""How the model runs under lookahead, set up around the decode rather than in its steps.

calibration  a forward's cost by its width, timed once per model and machine, kept on disk
static       a StaticCache for the steps, every bucket compiled (and timed) before the prefill
attention    an opt-in sdpa backend that skips ``repeat_kv`` on masked GQA steps
sdpa         which sdpa kernels a decode runs on (cuDNN's off on CUDA)
"""
