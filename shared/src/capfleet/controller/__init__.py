"""capfleet's controller engine: controller-runtime's model (a watch cache, one work queue per kind, a
reconcile per object that does the whole job) on kopf's watch streams, shared by the five operators."""
