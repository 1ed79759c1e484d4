"""The policy kinds vpol serves, one package each (model, compile, engine), over the shared layers (vpol.model,
vpol.cel, vpol.engine, vpol.desired)."""
