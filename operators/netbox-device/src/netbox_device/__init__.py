"""The netbox-device operator: claims bare-metal devices from NetBox and registers VMs in it."""
