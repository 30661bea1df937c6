package conversion

// ToHub calls sp's conversion to the hub, as Handler does.
func ToHub[H any](sp Spoke[H], src any, dst *H) error { return sp.toHub(src, dst) }

// FromHub calls sp's conversion from the hub, as Handler does.
func FromHub[H any](sp Spoke[H], src *H, dst any) error { return sp.fromHub(src, dst) }
