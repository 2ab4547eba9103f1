"""The DLLM half (Table 3, Figure 4, the appendix k/w tables): diffusion LLM backbones decoded by registered
DLLM samplers, with an AR proxy read through a tokenizer bridge.

Reading order:

* :mod:`~unie.dllm.backbone`: the LLaDA-like and Dream-like backbones (their loss, their own decoding rule
  :func:`~unie.dllm.backbone.decode` with :class:`~unie.dllm.backbone.DecodeOptions`, the ``plain`` sampler,
  LLaDA's Monte-Carlo likelihood);
* :mod:`~unie.dllm.bridge`: the AR proxy as the samplers see it (:class:`~unie.dllm.bridge.ProxyBridge`);
* :mod:`~unie.dllm.energy_decoding`: Algorithm 3 (the ``energy`` sampler: Ind-E, Inv-E, Uni-E);
* the baselines, one registered sampler each: :mod:`~unie.dllm.apd` (``apd``), :mod:`~unie.dllm.dawn`
  (``dawn``), :mod:`~unie.dllm.core_remask` (``core``), :mod:`~unie.dllm.fast_dllm` (``fast_dllm``);
* :mod:`~unie.dllm.decoder`: the contract lm-eval sees (:class:`~unie.dllm.decoder.ModelArgs`,
  :func:`~unie.dllm.decoder.build_decoder`, the decoders);
* :mod:`~unie.dllm.rows`: a config row or sweep point as ``model_args``.

The backbones (``METHODS``: ``llada``, ``dream``) and the DLLM samplers (:data:`~unie.core.registry.DLLM_SAMPLERS`)
register when their modules are imported; the registries import them at their first read (:data:`unie.REGISTERING`),
so importing this package imports none of them (:mod:`~unie.dllm.rows` resolves a profile without torch).  Adding a
sampler: ``docs/adding-a-dllm-sampler.md``.
"""
