public enum Ingot {}
