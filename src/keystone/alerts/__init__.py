"""Alerts that reach their owners: Alertmanager's configuration made from the registry's
receivers (`config`), where a receiver may send (`targets`), loading it into Alertmanager
(`publish`), and Alertmanager's API (`client`): its alerts' states and the silences."""
