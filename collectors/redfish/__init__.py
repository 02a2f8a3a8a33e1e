"""Baseboard management controllers over Redfish (DMTF DSP0266): power supplies, fans, inlet
and exhaust temperatures, redundancy and new event-log entries, as `psu`, `fan`, `node` points
and `sel` events. A central poller reads many BMCs out of band; the node agent reads its own in
band through the host interface. docs/bmc.md says how to set either up."""

from collectors.redfish.capture import read_resource, read_tree, tree_fetch
from collectors.redfish.client import RedfishClient, RedfishError, safe_path
from collectors.redfish.collector import RedfishCollector
from collectors.redfish.poller import Poller, PollerConfig
from collectors.redfish.reading import Reading
from collectors.redfish.secret import Credentials, CredentialStore, Secret
from collectors.redfish.targets import Bmc
from collectors.redfish.walk import BmcReader

__all__ = [
    "Bmc",
    "BmcReader",
    "CredentialStore",
    "Credentials",
    "Poller",
    "PollerConfig",
    "Reading",
    "RedfishClient",
    "RedfishCollector",
    "RedfishError",
    "Secret",
    "read_resource",
    "read_tree",
    "safe_path",
    "tree_fetch",
]
