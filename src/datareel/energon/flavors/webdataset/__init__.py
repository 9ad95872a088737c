"""Energon's ``megatron.energon.flavors.webdataset``: the WebDataset flavour's modules (``config``,
``base_webdataset``, ``sample_decoder``, ``prepare``, ``factories``, ``joined``), each by Energon's path."""
