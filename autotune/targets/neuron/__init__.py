"""The Neuron target: AWS Trainium and Inferentia2 through torch-neuronx, on two paths.

* ``path: xla`` (Trn1, Inf2; torch-neuronx 2.9 with torch-xla): the model runs on the lazy XLA
  device, ``neuronx-cc`` compiles each graph with the flags in ``NEURON_CC_FLAGS``, and
  ``MpDeviceLoader(batches_per_execution=N)`` decides where graphs are cut.
* ``path: native`` (Trn2, Trn3; torch-neuronx 2.13+): the model runs on the eager ``neuron``
  device and ``torch.compile(backend="neuron")`` compiles regions. The level comes from
  ``NEURON_COMPILER_OPT_LEVEL``, the logical core size from ``NEURON_LOGICAL_NC_CONFIG``; the
  compiler's auto-cast stays ``none`` (bf16 comes from the model or ``torch.autocast("neuron")``),
  and the remaining compiler flags still travel in ``NEURON_CC_FLAGS``.

No machine of this project has a Neuron device or compiler, so everything here is written from the
AWS Neuron documentation and tested by contract (exact env and flag strings). Where each spelling
comes from (Neuron documentation page names):

* "Neuron Compiler CLI Reference Guide (neuronx-cc)": ``--target`` (inf2, trn1, trn1n, trn2),
  ``--model-type`` (generic, transformer, unet-inference), ``--auto-cast`` (none, matmult, all),
  ``--auto-cast-type`` (bf16, fp16, tf32, fp8_e4m3), ``--logical-nc-config`` or ``-lnc`` (1, 2;
  trn2 only), ``--optlevel`` or ``-O`` (1, 2, 3; default 2), ``--enable-mixed-precision-accumulation``,
  ``--enable-fast-loading-neuron-binaries``; the synopsis order there is the canonical order here.
* "Neuron Compiler release notes" (2.6.0.19: ``unet-inference``; 2.5.0.28: ``--target=trn1n``) and
  "AWS Neuron SDK 2.27.0: Neuron Compiler release notes": ``--auto-cast`` defaults to ``none``
  (``matmult`` before) and mixed-precision accumulation is on by default, with the new
  ``--disable-mixed-precision-accumulation`` to turn it off.
* "NCC_EARG001" (compiler error codes): an LNC the target does not support, ``lnc=2`` on trn1.
* "Logical NeuronCore configuration": ``NEURON_LOGICAL_NC_CONFIG``, which must equal the compiler's
  ``--logical-nc-config``.
* "PyTorch NeuronX Environment Variables": ``NEURON_CC_FLAGS``, ``NEURON_COMPILE_CACHE_URL``.
* "Neuron Persistent Cache": ``--cache_dir=``, ``--no_cache``, ``--retry_failed_compilation`` and
  ``--log_level=`` are read by ``neuron_cc_wrapper`` and never reach the compiler; the default cache
  ``/var/tmp/neuron-compile-cache``; ``s3://`` cache URLs; ``--cache_dir`` wins over the env var.
* "Migration From XLA_USE_BF16/XLA_DOWNCAST_BF16": those variables are deprecated (torch-xla 2.5),
  turn stochastic rounding on by themselves, and ``NEURON_RT_STOCHASTIC_ROUNDING_EN=1`` is the
  replacement.
* "PyTorch NeuronX Tracing API for Inference": ``torch_neuronx.trace(func, example_inputs, *_, ...,
  compiler_workdir=None, compiler_args=None, ...)`` returns a TorchScript module (``torch.jit.save``
  and ``load``); its ``compiler_args`` (a string or a list of strings) go to neuronx-cc.
  "PyTorch NeuronX DataParallel API": ``torch_neuronx.DataParallel(model, device_ids=None, dim=0,
  set_dynamic_batching=True)``.
* "Component Release Notes for NeuronX Graph Compiler": the version each flag value came with
  (``flags.SINCE``), and 2.13.66.0's ``--enable-mixed-precision-accumulation``.
* ``NEURON_PLATFORM_TARGET_OVERRIDE``: read by AWS's own tools before anything else where no
  device answers (nkipy's ``get_platform_target``), with the ``--target`` spellings.
* "torch.compile backend reference" and "TorchNeuron environment variables":
  ``backend="neuron"``, ``torch.autocast(device_type="neuron")``, ``NEURON_COMPILER_OPT_LEVEL``
  (written ``-O<n>``, as torch-neuronx reads it), ``TORCH_NEURONX_NEFF_CACHE_DIR`` (default
  ``/tmp/neff_cache``).

Spelling choices: valued flags are written ``--long-name=value``, the long names of the CLI
reference (``--optlevel=3``, not ``-O3``; ``--logical-nc-config=2``, not ``-lnc 2``), because one
uniform form is what makes equal configurations produce byte-identical ``NEURON_CC_FLAGS`` and so
hit the same compile-cache entry (its key hashes the flag string as given).
"""

from autotune.targets.neuron.cache import compile_cache_env
from autotune.targets.neuron.flags import FLAGS_ENV, canonical_flags, parse_user_flags
from autotune.targets.neuron.platform import detect_platform, neuron_present, platform_family
from autotune.targets.neuron.target import NeuronTarget

__all__ = ["FLAGS_ENV", "NeuronTarget", "canonical_flags", "compile_cache_env", "detect_platform",
           "neuron_present", "parse_user_flags", "platform_family"]
