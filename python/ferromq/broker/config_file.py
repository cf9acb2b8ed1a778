"""The old name of `ferromq.broker.json_files`, kept only for `broker/pop/` (modes.py, order.py),
which another change is restructuring at the same time: once they import `json_files`, this module
goes."""

from ferromq.broker.json_files import load_json_file as load_config_file
from ferromq.broker.json_files import save_json_file as save_config_file

__all__ = ["load_config_file", "save_config_file"]
