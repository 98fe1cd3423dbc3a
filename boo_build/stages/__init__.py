"""The pipeline's stages, one module each, in the order data flows:

``torch_modules`` (the torch module of each kernel) -> ``export`` (MLIR
through iree-turbine) -> ``compile`` (iree-compile) -> ``validate`` (against
``reference``, under ``tolerances``) and ``benchmark`` (in ``bench_process``)
-> ``selection`` (the one decision: what ships, where torch calls go) ->
``pack`` (the bundle file). Their results are the typed records of
``boo_build.records``. The build graph (``boo_build.build``) and
``boo-build measure`` (``boo_build.measure``) run them.
"""
